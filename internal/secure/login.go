package secure

import "fmt"

// Login is a user and its password, as etcd's auth, SASL and HTTP basic
// auth take them: a user needs a password, and a password its user.
type Login struct {
	// User is the user's name, "" for no login; UserName is what the site
	// calls the setting.
	User     string
	UserName Name
	// Password is where the user's password comes from.
	Password Password
}

// Read returns the user's password, the zero Secret when there is no
// user. It refuses a user without a password (an empty file included),
// a password without a user, and a password given twice, naming the
// settings.
func (l Login) Read() (Secret, error) {
	src, err := l.Password.one()
	switch {
	case err != nil:
		return Secret{}, err
	case l.User == "" && src == nil:
		return Secret{}, nil
	case l.User == "" && src.env:
		return Secret{}, fmt.Errorf("%s is set but %s is not: name the user the password is for, or unset it", src.shown, l.UserName)
	case l.User == "":
		return Secret{}, fmt.Errorf("%s is set but %s is not: name the user the password is for", src.shown, l.UserName)
	case src == nil:
		return Secret{}, fmt.Errorf("%s has no password: set %s", l.UserName.is(l.User), l.Password.alternatives())
	}
	pw, err := src.get()
	switch {
	case err != nil:
		return Secret{}, err
	case pw == "":
		return Secret{}, fmt.Errorf("%s is empty: want the password of %s", src.shown, l.UserName.is(l.User))
	}
	return NewSecret(pw), nil
}
